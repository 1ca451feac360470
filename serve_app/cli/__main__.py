from serve_app.cli import main

main()
