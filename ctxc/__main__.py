from ctxc.cli import main

main()
