"""What a load test measured: measurement windows and their stability, every request by time
slice, release targets and their verdict, and the server's side from its statistics.

Rule: no locust or gevent import, so pytest, triton-perf and the gate can use it.
"""
