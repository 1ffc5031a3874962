"""Tool-call quality: a validator for one response, a passive monitor on live traffic, an active suite."""
