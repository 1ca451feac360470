"""batch runner lease: which Jobs replica coordinates a PROCESSING batch, and until when

- batches.runner: the coordinating replica (host:pid:id); NULL while none holds the batch.
- batches.runner_until: when the hold lapses unless renewed; another replica may then resume the batch.

Revision ID: 0006
Revises: 0005
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("batches", schema=None) as batch_op:
        batch_op.add_column(sa.Column("runner", sa.String(length=128), nullable=True))
        batch_op.add_column(sa.Column("runner_until", sa.DateTime(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("batches", schema=None) as batch_op:
        batch_op.drop_column("runner_until")
        batch_op.drop_column("runner")
