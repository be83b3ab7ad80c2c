"""``python -m engrain.cli``: the ``engrain`` script, for environments without it on PATH."""

from engrain.cli import main

main()
