"""cdk8s charts: the Kubernetes half of the product."""
