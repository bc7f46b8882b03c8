"""CDK stacks, one concern each; stage.py bundles them."""
