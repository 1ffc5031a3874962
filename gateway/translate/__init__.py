"""API translation: other client APIs become the gateway's internal chat request, and its answers
and streams are translated back. Pure functions and small state machines, no I/O."""
