"""Made-up secrets, one per kind of the scan's first rules, shared by the realtime scan's tests."""

SECRETS = {
    "openai_key": "sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4zAb7cDe0fGh3iJk6lMn9oPq2rSt5uVw8x",
    "anthropic_key": "sk-ant-api03-Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4zAb7cDe0fGh3iJk6lMn9oPq2rSt5uVw8x-AAAA",
    "stripe_key": "sk_live_51Hb3dEf6hIj9kLm2nOp5qRs8t",
    "aws_access_key": "AKIAIOSFODNN7EXAMPLE",
    "aws_secret_key": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    "github_token": "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ012345678",
    "gitlab_token": "glpat-Ab3dEf6hIj9kLm2nOp5q",
    "slack_token": "xoxb-123456789012-1234567890123-Ab3dEf6hIj9kLm2nOp5qRs8t",
    "google_api_key": "AIzaSyAb3dEf6hIj9kLm2nOp5qRs8tUv1wXy4zQ",
    "huggingface_token": "hf_Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4zAb",
    "npm_token": "npm_Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4zAb7c",
    "pypi_token": "pypi-AgEIcHlwaS5vcmcCJDU2YjQ4ZGUyLWQ5ZDctNDg3Ni04ZGE3LTk3ZDk0ZjRhYmYzMwACKlsz",
    "groq_key": "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",
    "digitalocean_token": "dop_v1_" + "0123456789abcdef" * 4,
    "azure_storage_key": "AccountKey=" + "Ab3dEf6hIj9kLm2n" * 5 + "Op5qRs==",
    "sendgrid_key": "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",
    "jwt": "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4ifQ.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c",
    "url_password": "postgres://admin:S3cr3tPassw0rd@db.internal:5432/app",
    "phone_number": "+1 (415) 555-0132",
    "ssn": "123-45-6789",
    "email": "jane.doe@example.com",
    "private_key": "-----BEGIN OPENSSH PRIVATE KEY-----",
}
"""One sample of each of the first kinds (all made up)."""
