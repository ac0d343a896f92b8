"""What the benchmarks share; no study lives here, and nothing here imports one.

`common` describes the machine (cores, RAM, the disk and its limits, page-cache
dropping, CPU and GPU busy time); `workload` is W1 and its training options;
`runs` trains a system in a process of its own (`diskgnn.train`, or a loop
writing progress lines) under `memcap`'s cgroup memory cap; `output` writes a
result's JSON, table and report section (`finish`); `plots` draws the reports'
figures; `faultfs` is a FUSE mirror that fails chosen reads. `reference` (the
in-memory, full-neighbour trainer accuracy is checked against) and `naive` (a
np.memmap loop with nothing overlapped) are the two training loops the studies
compare diskgnn with.
"""
