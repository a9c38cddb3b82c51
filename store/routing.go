package store

import (
	"context"
	"fmt"

	"github.com/go-llmflow/llmflow"
)

// Runtime routing (runtime_upstreams, model_aliases): upstreams and
// aliases registered through the admin API. Like the other admin tables,
// every change bumps admin_state.generation in the same transaction, so
// gateways sharing the store rebuild their routes.

// PutUpstream creates or replaces the runtime upstream (Model, Name),
// keeping the first CreatedAt of a replaced one.
func (a *sqlDB) PutUpstream(ctx context.Context, u llmflow.RuntimeUpstream) error {
	if u.Model == "" || u.Name == "" || u.BaseURL == "" {
		return &llmflow.Error{Code: llmflow.EINVALID, Message: "model, name and base_url are required"}
	}
	return a.tx(ctx, func(q querier) error {
		_, err := q.exec(ctx, `INSERT INTO runtime_upstreams (model, name, base_url, created_at, updated_at, by_actor, inherit_key, key_name) VALUES (?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (model, name) DO UPDATE SET base_url = excluded.base_url, updated_at = excluded.updated_at, by_actor = excluded.by_actor, inherit_key = excluded.inherit_key, key_name = excluded.key_name`,
			u.Model, u.Name, u.BaseURL, a.time(u.CreatedAt), a.time(u.UpdatedAt), u.By, u.InheritKey, u.KeyName)
		if err != nil {
			return fmt.Errorf("put upstream: %w", err)
		}
		return bump(ctx, q)
	})
}

// DeleteUpstream removes the runtime upstream (model, name);
// llmflow.ErrNotFound when there is none.
func (a *sqlDB) DeleteUpstream(ctx context.Context, model, name string) error {
	return a.tx(ctx, func(q querier) error {
		n, err := q.exec(ctx, `DELETE FROM runtime_upstreams WHERE model = ? AND name = ?`, model, name)
		if err != nil {
			return fmt.Errorf("delete upstream: %w", err)
		}
		if n == 0 {
			return llmflow.ErrNotFound
		}
		return bump(ctx, q)
	})
}

// Upstreams returns every runtime upstream, by model and name.
func (a *sqlDB) Upstreams(ctx context.Context) ([]llmflow.RuntimeUpstream, error) {
	rows, err := a.read.query(ctx, `SELECT model, name, base_url, created_at, updated_at, by_actor, inherit_key, key_name FROM runtime_upstreams ORDER BY model, name`)
	if err != nil {
		return nil, fmt.Errorf("upstreams: %w", err)
	}
	defer rows.Close()
	out, err := scanRows(rows, func() (llmflow.RuntimeUpstream, error) {
		var u llmflow.RuntimeUpstream
		err := rows.Scan(&u.Model, &u.Name, &u.BaseURL, dbTime{&u.CreatedAt}, dbTime{&u.UpdatedAt}, &u.By, &u.InheritKey, &u.KeyName)
		return u, err
	})
	if err != nil {
		return nil, fmt.Errorf("upstreams: %w", err)
	}
	return out, nil
}

// PutAlias creates the alias or switches it to another model.
func (a *sqlDB) PutAlias(ctx context.Context, al llmflow.ModelAlias) error {
	if al.Name == "" || al.Model == "" {
		return &llmflow.Error{Code: llmflow.EINVALID, Message: "alias name and model are required"}
	}
	return a.tx(ctx, func(q querier) error {
		_, err := q.exec(ctx, `INSERT INTO model_aliases (name, model, updated_at, by_actor) VALUES (?, ?, ?, ?)
ON CONFLICT (name) DO UPDATE SET model = excluded.model, updated_at = excluded.updated_at, by_actor = excluded.by_actor`,
			al.Name, al.Model, a.time(al.UpdatedAt), al.By)
		if err != nil {
			return fmt.Errorf("put alias: %w", err)
		}
		return bump(ctx, q)
	})
}

// DeleteAlias removes the alias; llmflow.ErrNotFound when there is none.
func (a *sqlDB) DeleteAlias(ctx context.Context, name string) error {
	return a.tx(ctx, func(q querier) error {
		n, err := q.exec(ctx, `DELETE FROM model_aliases WHERE name = ?`, name)
		if err != nil {
			return fmt.Errorf("delete alias: %w", err)
		}
		if n == 0 {
			return llmflow.ErrNotFound
		}
		return bump(ctx, q)
	})
}

// Aliases returns every alias, by name.
func (a *sqlDB) Aliases(ctx context.Context) ([]llmflow.ModelAlias, error) {
	rows, err := a.read.query(ctx, `SELECT name, model, updated_at, by_actor FROM model_aliases ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("aliases: %w", err)
	}
	defer rows.Close()
	out, err := scanRows(rows, func() (llmflow.ModelAlias, error) {
		var al llmflow.ModelAlias
		err := rows.Scan(&al.Name, &al.Model, dbTime{&al.UpdatedAt}, &al.By)
		return al, err
	})
	if err != nil {
		return nil, fmt.Errorf("aliases: %w", err)
	}
	return out, nil
}
