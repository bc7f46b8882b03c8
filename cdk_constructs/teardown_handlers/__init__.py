"""Lambda handlers for the custom resources that make `cdk destroy` clean.

This folder is the Lambda code asset: standard library and boto3 only (both are in the Lambda
Python runtime), no imports from the rest of the repository.
"""
