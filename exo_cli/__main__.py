from exo_cli.main import main

main()
