"""Lambda handlers of the project's own custom resources: those that make `cdk destroy` clean
and keep what must be kept, and the copy of the trainer images into the app's repository.

This folder is the Lambda code asset: standard library and boto3 only (both are in the Lambda
Python runtime), no imports from the rest of the repository.
"""
