print("requests-bench")
