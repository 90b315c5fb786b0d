"""`triton-tune`: search serving configurations of one model for the best one that still
answers like PyTorch.

`space` is what may change (format, max_batch_size, dynamic batching, instances, intra-op
threads, client concurrency), `strategy` how candidates are chosen (quick coordinate search
or every combination) and ranked (objectives, constraints, Pareto front), `trials` deploys
each candidate with the repository builder, checks parity and measures it with triton-perf's
load generator, `tables` writes what was found and `tuner` is the command. It lives in the
Locust front end because it drives Locust's generator, as triton-perf does.
"""
