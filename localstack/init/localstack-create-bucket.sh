#!/bin/sh
# Runs inside the LocalStack container when S3 is ready (ready.d hook).
set -eu
awslocal s3api head-bucket --bucket "${TIERED_BUCKET:-tieredlog}" 2>/dev/null \
  || awslocal s3 mb "s3://${TIERED_BUCKET:-tieredlog}"
# A broker killed mid-upload leaves multipart parts behind: abort them after a day.
awslocal s3api put-bucket-lifecycle-configuration --bucket "${TIERED_BUCKET:-tieredlog}" \
  --lifecycle-configuration '{"Rules":[{"ID":"abort-incomplete-mpu","Status":"Enabled","Filter":{"Prefix":""},"AbortIncompleteMultipartUpload":{"DaysAfterInitiation":1}}]}'
