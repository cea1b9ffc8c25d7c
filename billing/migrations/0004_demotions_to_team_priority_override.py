from django.db import migrations


def forward(apps, schema_editor):
    """Teams demoted before the override moved to queues keep their demotion."""
    TeamDemotion = apps.get_model("billing", "TeamDemotion")
    Team = apps.get_model("queues", "Team")
    for demotion in TeamDemotion.objects.filter(lifted_at__isnull=True):
        Team.objects.filter(pk=demotion.team_id).update(priority_override=demotion.priority_class_id)


class Migration(migrations.Migration):
    """Copy each active demotion's priority class onto its team (queues.Team.priority_override)."""

    dependencies = [
        ("billing", "0003_alter_usagerecord_allocation"),
        ("queues", "0011_team_priority_override"),
    ]

    operations = [migrations.RunPython(forward, migrations.RunPython.noop)]
