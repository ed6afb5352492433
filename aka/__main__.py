"""`python -m aka ...`: the console script without installing (the device machine uses PYTHONPATH)."""

from aka.cli.main import main

if __name__ == "__main__":
    main()
