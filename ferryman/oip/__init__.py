"""Generated stubs of the Open Inference Protocol v2 (protos/ferryman/oip/v2); the router
imports them, the SDK never does (their proto package, ``inference``, is the one
tritonclient registers too)."""
