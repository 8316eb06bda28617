# The Python package's tests on the device (see review-tests.sh; needs gpu-artifacts/testing).
step python python
