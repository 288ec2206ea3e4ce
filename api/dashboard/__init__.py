"""The spend dashboard: one static page that draws /v1/usage and /v1/jobs in the browser."""
