from costsim.cli import main

main()
