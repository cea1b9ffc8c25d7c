from django.db import migrations


class Migration(migrations.Migration):
    """Allocation's table, kept under its old name while the model moved from queues, takes the pools name."""

    dependencies = [
        ("pools", "0008_move_allocation_in_kube_models_out"),
        ("queues", "0010_delete_allocation"),
    ]

    operations = [
        migrations.AlterModelTable(name="allocation", table=None),
    ]
