"""AWS: the EC2 fleet provider, its spot notice watcher and its price catalog.

A spot VM on AWS is memoryless here (no lifetime model: its age does not matter).
"""

from clusters.aws.fleet import AwsFleet

__all__ = ["AwsFleet"]
