"""The training image: workloads that run under torchrun. Imports neither CDK nor cdk8s."""
