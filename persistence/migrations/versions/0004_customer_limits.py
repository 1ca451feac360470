"""customer limits: per-customer admission limits, the shared rate windows, live-session seats and refusals

- customers.requests_per_minute / audio_seconds_per_day / live_sessions: NULL takes the operator's default
  (KHULUMA_LIMITS_*), 0 is unlimited;
- rate_windows: requests admitted per customer and minute, claimed by the ingress replicas with one UPSERT;
- live_session_slots: the seats of open live sessions, each with a lease;
- usage_refusals: refused requests per customer, minute and reason (never in usage_records: not billed).

Revision ID: 0004
Revises: 0003
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("customers", schema=None) as batch_op:
        batch_op.add_column(sa.Column("requests_per_minute", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("audio_seconds_per_day", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("live_sessions", sa.Integer(), nullable=True))

    op.create_table(
        "rate_windows",
        sa.Column("customer_id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("window_start", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("used", sa.Integer(), nullable=False),
        sa.Column("last_grant", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("customer_id", "window_start"),
    )
    op.create_table(
        "live_session_slots",
        sa.Column("customer_id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("slot", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("session_id", sa.String(length=36), nullable=False),
        sa.Column("expires_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("customer_id", "slot"),
    )
    with op.batch_alter_table("live_session_slots", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_live_session_slots_session_id"), ["session_id"], unique=False)
    op.create_table(
        "usage_refusals",
        sa.Column("customer_id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("minute", sa.DateTime(), nullable=False),
        sa.Column("reason", sa.String(length=32), nullable=False),
        sa.Column("count", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("customer_id", "minute", "reason"),
    )


def downgrade() -> None:
    op.drop_table("usage_refusals")
    with op.batch_alter_table("live_session_slots", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_live_session_slots_session_id"))
    op.drop_table("live_session_slots")
    op.drop_table("rate_windows")
    with op.batch_alter_table("customers", schema=None) as batch_op:
        batch_op.drop_column("live_sessions")
        batch_op.drop_column("audio_seconds_per_day")
        batch_op.drop_column("requests_per_minute")
