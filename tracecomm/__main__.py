from tracecomm.cli import main

main()
