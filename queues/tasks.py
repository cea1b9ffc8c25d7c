"""Celery tasks of the queues app: thin, named; they call one service."""

from __future__ import annotations

from celery import shared_task


@shared_task(name="queues.policy_push", bind=True, ignore_result=True, max_retries=8, acks_late=True)
def policy_push(self, push_id: int) -> None:
    """Push the policy to one cluster; an unreachable cluster is retried with exponential backoff."""
    from clusters.push import backoff_seconds, policy_push_run
    from queues.models import PolicyPush

    push = policy_push_run(push_id=push_id)
    if push is not None and push.state == PolicyPush.State.RETRYING and not self.request.is_eager:
        raise self.retry(countdown=backoff_seconds(push.attempts))


@shared_task(name="queues.policy_push_retry_due", ignore_result=True)
def policy_push_retry_due() -> None:
    """Beat entry: retry failed pushes whose backoff has passed (also heals retries lost with a worker)."""
    from clusters.push import policy_pushes_due

    for push_id in policy_pushes_due():
        policy_push.delay(push_id)


@shared_task(name="queues.policy_preview", ignore_result=True, acks_late=True)
def policy_preview(preview_id: int) -> None:
    """Replay a queued what-if preview (a redelivered message finds it no longer queued and does nothing)."""
    from queues.policy.previews import policy_preview_run

    policy_preview_run(preview_id=preview_id)


@shared_task(name="queues.policy_previews_sweep", ignore_result=True)
def policy_previews_sweep() -> None:
    """Beat entry: delete old what-if previews and fail those whose worker died mid-replay."""
    from queues.policy.previews import policy_previews_sweep as sweep

    sweep()
