"""leasecheck: the product's front — CLI, runner, store directory and reports."""

__version__ = "0.1.0"
