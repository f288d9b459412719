"""The job store's Alembic environment. `JobStore.migrate()` runs it; there is
no alembic.ini: `service.store.store.alembic_config(url)` builds the config.

A new revision, after changing `service/store/models.py` (then read and trim
what autogenerate wrote; the schema tests compare the result with the models):

    python -c "from alembic import command; from service.store.store import alembic_config; \
        command.revision(alembic_config('sqlite:///migrated.db'), message='what changed', \
        rev_id='0002', autogenerate=True)"
"""
