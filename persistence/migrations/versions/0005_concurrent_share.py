"""concurrent share: the percentage of a server's capacity for one kind of work a customer may hold in flight

- customers.concurrent_share: NULL takes the operator's default (KHULUMA_ADMISSION_CONCURRENT_SHARE), 0 is no cap
  of its own.

Revision ID: 0005
Revises: 0004
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("customers", schema=None) as batch_op:
        batch_op.add_column(sa.Column("concurrent_share", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("customers", schema=None) as batch_op:
        batch_op.drop_column("concurrent_share")
