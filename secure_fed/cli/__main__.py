"""`python -m secure_fed.cli`: the `secure-fed` console script."""

from secure_fed.cli import main

main()
