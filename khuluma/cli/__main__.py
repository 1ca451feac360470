from khuluma.cli import main

main()
