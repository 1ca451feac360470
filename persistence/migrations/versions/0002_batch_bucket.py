"""batches.bucket: the bucket a batch's files were uploaded to

A batch keeps reading its files from the bucket it was created with, even after KHULUMA_S3_BUCKET changes or
when another service instance on the same database resumes it. NULL (batches created before this revision)
means the configured bucket.

Revision ID: 0002
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("batches", schema=None) as batch_op:
        batch_op.add_column(sa.Column("bucket", sa.String(length=255), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("batches", schema=None) as batch_op:
        batch_op.drop_column("bucket")
