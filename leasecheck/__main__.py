from leasecheck.cli import main

main()
