"""Adapters for third-party lock and lease libraries, audited by ``leasecheck audit``.

Each module wraps one library the way its README tells users to use it (see
:mod:`.lockbase`), declares the audit it is judged by (:mod:`.audit`), and
imports its library only where it calls it: the libraries are optional extras
(``pip install 'leasecheck[audit]'``), named in each adapter's ``requires``.
"""
