/// Test support for code that uses Requests. See docs/testing.md.
public enum RequestsTesting {}
