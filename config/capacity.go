package config

import (
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/zclconf/go-cty/cty"

	"github.com/go-llmflow/llmflow/engine"
)

// AutoCapacity is a pool's capacity measured from its engines (capacity =
// "auto"): the gateway reads each upstream's Prometheus metrics and adapts
// C between Min and Max (package autocap). The pool's Capacity is where C
// starts (Min).
type AutoCapacity struct {
	Min, Max int
	// KVTarget is the KV-cache usage C grows to (kv_target, 0..1];
	// default 0.9.
	KVTarget float64
	// Interval is how often the engines' metrics are read
	// (capacity_interval); default DefaultCapacityInterval.
	Interval time.Duration
	// Hold is how long C stays put after a change (capacity_hold);
	// default DefaultCapacityHold.
	Hold time.Duration
	// Headroom is the headroom given in the block; -1: none given, a
	// quarter of C (DefaultHeadroom) as C changes.
	Headroom int
}

// Defaults of AutoCapacity.
const (
	DefaultKVTarget         = 0.9
	DefaultCapacityInterval = 2 * time.Second
	DefaultCapacityHold     = 10 * time.Second
)

// decodeCapacity decodes a pool's capacity: a whole number, or "auto"
// with min and max (and optionally kv_target, capacity_interval,
// capacity_hold), after which Capacity is min.
func (d *decoder) decodeCapacity(attrs hcl.Attributes, p *Pool) {
	autoOnly := []string{"min", "max", "kv_target", "capacity_interval", "capacity_hold"}
	if a := attrs["capacity"]; a != nil {
		if v, hds := a.Expr.Value(nil); !hds.HasErrors() && v.IsWhollyKnown() && !v.IsNull() && v.Type() == cty.String && v.AsString() == "auto" {
			d.decodeAuto(attrs, a, p)
			return
		}
	}
	intAttr(d, attrs, "capacity", 1, MaxCapacity, &p.Capacity)
	for _, name := range autoOnly {
		if a := attrs[name]; a != nil {
			d.errorf(a.NameRange, "%s applies only to capacity = \"auto\"", name)
		}
	}
}

func (d *decoder) decodeAuto(attrs hcl.Attributes, capAttr *hcl.Attribute, p *Pool) {
	au := &AutoCapacity{KVTarget: DefaultKVTarget, Interval: DefaultCapacityInterval, Hold: DefaultCapacityHold, Headroom: -1}
	lo, hi := intAttr(d, attrs, "min", 1, MaxCapacity, &au.Min), intAttr(d, attrs, "max", 1, MaxCapacity, &au.Max)
	switch {
	case lo == nil && attrs["min"] == nil:
		d.errorf(capAttr.Expr.Range(), "capacity = \"auto\" needs min and max (the bounds of C)")
		return
	case hi == nil && attrs["max"] == nil:
		d.errorf(capAttr.Expr.Range(), "capacity = \"auto\" needs min and max (the bounds of C)")
		return
	case lo == nil || hi == nil:
		return // reported
	case au.Max < au.Min:
		d.errorf(hi.Expr.Range(), "max (%d) must be at least min (%d)", au.Max, au.Min)
		return
	}
	if a := attrs["kv_target"]; a != nil {
		if d.float(attrs, "kv_target", 0, 1, &au.KVTarget) != nil && au.KVTarget == 0 {
			d.errorf(a.Expr.Range(), "kv_target must be above 0")
		}
	}
	d.duration(attrs, "capacity_interval", &au.Interval)
	d.duration(attrs, "capacity_hold", &au.Hold)
	p.Capacity, p.Auto = au.Min, au
}

// decodeAutoHeadroom finishes an auto pool after its engine and reclaim:
// its engines must report their load (engine.Metrics), and a headroom
// given (checked against the capacity, min, by decodeReclaim) stays, one
// not given follows C.
func (d *decoder) decodeAutoHeadroom(attrs hcl.Attributes, p *Pool) {
	if p.Auto == nil {
		return
	}
	if m := p.Engine.Metrics; m.Running == "" || m.Waiting == "" {
		d.errorf(attrs["capacity"].Expr.Range(), "capacity = \"auto\" reads the engines' load from their metrics; the %s engines of this pool expose none the gateway knows: give a number", p.Engine.Name)
	}
	if attrs["headroom"] != nil && p.Reclaim != engine.ReclaimNone {
		p.Auto.Headroom = p.Headroom
	}
}
