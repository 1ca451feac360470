"""realtime_client_secrets: the Live API's short-lived, single-use client secrets

`POST /v1/realtime/client_secrets` stores the SHA-256 of each secret it mints with the minting token, its
customer and project, the session configuration and the expiry; `/v1/realtime` consumes a secret once
(`used_at`, set by a conditional UPDATE).

Revision ID: 0003
Revises: 0002
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "realtime_client_secrets",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("token_id", sa.Integer(), sa.ForeignKey("api_tokens.id", ondelete="CASCADE"), nullable=False),
        sa.Column("customer_id", sa.Integer(), nullable=False),
        sa.Column("project_id", sa.Integer(), nullable=False),
        sa.Column("session", sa.JSON(), nullable=False),
        sa.Column("secret_hash", sa.String(length=64), nullable=False, unique=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("expires_at", sa.DateTime(), nullable=False),
        sa.Column("used_at", sa.DateTime(), nullable=True),
    )
    op.create_index("ix_realtime_client_secrets_expires_at", "realtime_client_secrets", ["expires_at"])
    op.create_index("ix_realtime_client_secrets_token_id", "realtime_client_secrets", ["token_id"])


def downgrade() -> None:
    op.drop_table("realtime_client_secrets")  # its indexes go with it
