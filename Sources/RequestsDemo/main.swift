print("requests-demo")
