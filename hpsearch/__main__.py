"""``python -m hpsearch`` runs the command line."""

from hpsearch.cli import main

if __name__ == "__main__":
    main(prog_name="hpsearch")
