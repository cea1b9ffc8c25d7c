# The index of every team's jobs, newest first: the job list of platform admins and operators. (The read-only
# "operator" group itself is kept by a post_migrate handler, queues.apps.operator_group_ensure.)

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("queues", "0012_stored_diagnoses"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="job",
            index=models.Index(fields=["-submitted_at", "-id"], name="job_recent"),
        ),
    ]
