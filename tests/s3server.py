"""The S3 server moved to `devstack.s3server` (real local services shared by the tests and the
benchmarks); this name stays so the many test modules that import it need no change."""

from devstack.s3server import S3Server, free_port_pairs, start_s3_server, weed_binary

__all__ = ["S3Server", "free_port_pairs", "start_s3_server", "weed_binary"]
