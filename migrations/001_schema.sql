-- The example source schema: tenants, their configuration and feature flags.
CREATE TABLE tenants (
    id          text PRIMARY KEY,
    name        text NOT NULL,
    plan        text NOT NULL CHECK (plan IN ('free', 'team', 'enterprise')),
    region      text NOT NULL,
    seats       integer NOT NULL,
    monthly_fee numeric(10, 2) NOT NULL,
    tags        text[] NOT NULL DEFAULT '{}',
    created_at  timestamptz NOT NULL DEFAULT now(),
    active      boolean NOT NULL DEFAULT true
);

CREATE TABLE tenant_config (
    tenant_id  text NOT NULL REFERENCES tenants (id),
    key        text NOT NULL,
    value      jsonb NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, key)
);

CREATE TABLE feature_flags (
    key         text PRIMARY KEY,
    description text NOT NULL,
    enabled     boolean NOT NULL,
    rollout_pct smallint NOT NULL CHECK (rollout_pct BETWEEN 0 AND 100),
    allow_list  text[] NOT NULL DEFAULT '{}',
    payload     bytea
);
