"""The price table `plan` costs a configuration with, committed with its date.

USD list prices, On-Demand Linux, region us-east-1 (us-west-2 lists the same figures for these
types). The P4d/P5 figures are those after AWS's June 2025 price reduction for P4 and P5
instances. Recorded on PRICES_AS_OF from the public EC2, EKS, VPC and FSx pricing pages as the
maintainer knew them, without network access from this machine: check them against the AWS
Price List API before a budget depends on them, and update the date with the figures.
Reservations (ODCRs) bill at the On-Demand rate; capacity blocks are priced per offer, so the
On-Demand rate is an upper bound for them.
"""

from __future__ import annotations

PRICES_AS_OF = "2026-11-22"
PRICES_REGION = "us-east-1"
HOURS_PER_MONTH = 730  # AWS bills GB-month prices over 730 hours

INSTANCE_HOURLY_USD: dict[str, float] = {
    "p4d.24xlarge": 21.96,
    "p5.48xlarge": 55.04,
    "g5.xlarge": 1.006, "g5.2xlarge": 1.212, "g5.4xlarge": 1.624, "g5.8xlarge": 2.448,
    "g5.12xlarge": 5.672, "g5.16xlarge": 4.096, "g5.24xlarge": 8.144, "g5.48xlarge": 16.288,
    "g6.xlarge": 0.8048, "g6.2xlarge": 0.9776, "g6.4xlarge": 1.3232, "g6.8xlarge": 2.0144,
    "g6.12xlarge": 4.6016, "g6.16xlarge": 3.3968, "g6.24xlarge": 6.6752, "g6.48xlarge": 13.3504,
    "m5.large": 0.096, "m5.xlarge": 0.192, "m5.2xlarge": 0.384, "m5.4xlarge": 0.768, "m5.8xlarge": 1.536,
    "m6i.large": 0.096, "m6i.xlarge": 0.192, "m6i.2xlarge": 0.384, "m6i.4xlarge": 0.768,
    "c5.2xlarge": 0.34, "c5.4xlarge": 0.68,
}
# p4de, p5e and p5en are sold mostly through capacity blocks and reservations: no list price
# recorded here, and `plan` says so instead of guessing.

EKS_CLUSTER_HOURLY_USD = 0.10  # standard Kubernetes version support
EKS_EXTENDED_SUPPORT_CLUSTER_HOURLY_USD = 0.60  # a version in extended support (per AWS's notices and EKS pricing)
NAT_GATEWAY_HOURLY_USD = 0.045  # per gateway, before data processing
# FSx for Lustre PERSISTENT_2 SSD storage per GB-month, by MB/s per TiB.
FSX_PERSISTENT_2_GB_MONTH_USD: dict[int, float] = {125: 0.145, 250: 0.21, 500: 0.29, 1000: 0.42}


def instance_hourly(instance_type: str) -> float | None:
    return INSTANCE_HOURLY_USD.get(instance_type)


def fsx_hourly(storage_gib: int, throughput_per_tib: int) -> float:
    return storage_gib * FSX_PERSISTENT_2_GB_MONTH_USD[throughput_per_tib] / HOURS_PER_MONTH
