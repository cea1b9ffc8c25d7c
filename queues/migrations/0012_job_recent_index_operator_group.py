# The index of every team's jobs, newest first (the job list of platform admins and operators), and the
# read-only "operator" group: it holds queues.view_job, which lets its members see every team's jobs.

from django.contrib.auth.management import create_permissions
from django.db import migrations, models

OPERATOR_GROUP = "operator"


def operator_group_create(apps, schema_editor):
    """The operator group with the view-job permission (the permissions are created first on a fresh database)."""
    queues_config = apps.get_app_config("queues")
    queues_config.models_module = True
    create_permissions(queues_config, apps=apps, verbosity=0)
    queues_config.models_module = None
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    view_job = Permission.objects.get(content_type__app_label="queues", codename="view_job")
    group, _ = Group.objects.get_or_create(name=OPERATOR_GROUP)
    group.permissions.add(view_job)


def operator_group_delete(apps, schema_editor):
    """Going back: the group goes (its members keep their accounts)."""
    apps.get_model("auth", "Group").objects.filter(name=OPERATOR_GROUP).delete()


class Migration(migrations.Migration):

    dependencies = [
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
        ("queues", "0011_team_priority_override"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="job",
            index=models.Index(fields=["-submitted_at", "-id"], name="job_recent"),
        ),
        migrations.RunPython(operator_group_create, operator_group_delete),
    ]
