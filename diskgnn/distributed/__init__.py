"""Training on several processes and machines under torchrun: the process group (group.py) and cooperative
minibatching's ownership and exchange (cooperative.py). docs/distributed.md explains both."""
