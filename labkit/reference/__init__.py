"""The reference solution: the proxy the lab's final step builds (see ``proxy.py``).

It exists for grading and benchmarks. The notebooks teach it piece by piece; nothing in labkit
calls it for them.
"""
