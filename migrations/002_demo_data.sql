-- Demo data: a few hundred tenants with configuration, and a handful of feature flags.
INSERT INTO tenants (id, name, plan, region, seats, monthly_fee, tags, created_at, active)
SELECT 'tenant-' || lpad(i::text, 4, '0'),
       'Tenant ' || i,
       (ARRAY['free', 'team', 'enterprise'])[1 + i % 3],
       (ARRAY['europe-west1', 'us-central1', 'asia-east1'])[1 + i % 3],
       5 + (i * 7) % 500,
       ((i * 37) % 1000) + 0.99,
       ARRAY['demo', 'cohort-' || (i % 5)],
       timestamptz '2025-01-01 00:00:00+00' + make_interval(hours => i),
       i % 17 <> 0
FROM generate_series(1, 300) AS i;

-- Ids with characters that need care in URLs and row keys.
INSERT INTO tenants (id, name, plan, region, seats, monthly_fee, tags)
VALUES ('acme/eu#1', 'ACME Europe', 'enterprise', 'europe-west1', 1200, 9999.00, ARRAY['awkward-id']),
       ('zürich 50%', 'Zürich Labs', 'team', 'europe-west6', 40, 490.00, ARRAY['awkward-id']);

INSERT INTO tenant_config (tenant_id, key, value)
SELECT t.id, k.key, k.value
FROM tenants t
CROSS JOIN (VALUES
    ('limits', '{"requests_per_minute": 600, "storage_gb": 50}'::jsonb),
    ('branding', '{"theme": "dark", "logo": null}'::jsonb)
) AS k (key, value);

INSERT INTO feature_flags (key, description, enabled, rollout_pct, allow_list, payload) VALUES
    ('new-billing', 'The new billing pipeline', true, 25, ARRAY['tenant-0001', 'tenant-0002'], NULL),
    ('dark-mode', 'Dark mode in the console', true, 100, '{}', NULL),
    ('ai-search', 'Semantic search', false, 0, '{}', '\xdeadbeef'),
    ('eu-residency', 'Pin EU tenants to EU storage', true, 100, ARRAY['acme/eu#1'], NULL);
