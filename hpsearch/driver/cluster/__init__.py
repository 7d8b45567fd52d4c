"""What talks to the cluster rather than to a sweep.

============  ==========================================================================
connect       reach a Ray cluster or start a local instance, in seconds or one clear error
preflight     CUDA on every GPU node before the first trial; simulated GPUs for tests
doctor        ``hpsearch doctor``: every node checked, one line per problem
doctor_node   what a node reports about itself (runs on the node)
doctor_rules  the node reports judged (pure)
submit        ``hpsearch submit``: a sweep as a Ray Job
orphans       a killed driver's local Ray, stopped before a resume
============  ==========================================================================
"""
