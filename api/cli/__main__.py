"""`python -m api.cli ...`: the `brigade` command, where it is not installed
as one (a checkout; the tests and the benches start servers so)."""

from api.cli.main import main

if __name__ == "__main__":
    main()
