from kvtrace.launch import main

main()
