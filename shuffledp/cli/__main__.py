"""``python -m shuffledp.cli``: the ``shuffledp`` command."""

from shuffledp.cli import main

main()
