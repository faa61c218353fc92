from tessel_dsl.cli import main

main()
