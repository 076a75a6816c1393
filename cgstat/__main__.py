from cgstat.cli import main

main()
