package client

import (
	"bytes"
	"context"
	"encoding/json"
	"mime/multipart"
	"net/url"
	"strconv"

	v1 "github.com/pandastack/pandastack/internal/wire/v1"
)

// Functions and schedules (docs/functions.md).

// DeployFunction uploads a bundle (.zip or .tar.gz bytes) with its spec; the answer comes once
// the version's warm snapshot is baked.
func (c *Client) DeployFunction(ctx context.Context, spec v1.FunctionSpec, bundle []byte) (v1.Function, error) {
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	sw, err := mw.CreateFormField("spec")
	if err != nil {
		return v1.Function{}, err
	}
	if err := json.NewEncoder(sw).Encode(spec); err != nil {
		return v1.Function{}, err
	}
	bw, err := mw.CreateFormFile("bundle", "bundle")
	if err != nil {
		return v1.Function{}, err
	}
	bw.Write(bundle)
	if err := mw.Close(); err != nil {
		return v1.Function{}, err
	}
	resp, err := c.Do(ctx, "POST", "/v1/functions", nil, bytes.NewReader(buf.Bytes()), int64(buf.Len()), mw.FormDataContentType(), "")
	if err != nil {
		return v1.Function{}, err
	}
	defer resp.Body.Close()
	var fn v1.Function
	return fn, json.NewDecoder(resp.Body).Decode(&fn)
}

// ListFunctions returns the team's functions, newest first.
func (c *Client) ListFunctions(ctx context.Context) ([]v1.Function, error) {
	out, err := send[v1.Functions](ctx, c, "GET", "/v1/functions", nil, nil)
	return out.Functions, err
}

// GetFunction returns one function (its latest version).
func (c *Client) GetFunction(ctx context.Context, id string) (v1.Function, error) {
	return send[v1.Function](ctx, c, "GET", objPath("/v1/functions", id), nil, nil)
}

// DeleteFunction deletes a function, its versions and its runs.
func (c *Client) DeleteFunction(ctx context.Context, id string) error {
	return c.call(ctx, "DELETE", objPath("/v1/functions", id), nil, nil, nil)
}

// FunctionVersions returns a function's versions, newest first.
func (c *Client) FunctionVersions(ctx context.Context, id string) ([]v1.FunctionVersion, error) {
	out, err := send[v1.FunctionVersions](ctx, c, "GET", objPath("/v1/functions", id)+"/versions", nil, nil)
	return out.Versions, err
}

// Invoke runs a function with payload (JSON) and waits for the run; async records it and
// returns at once (queued).
func (c *Client) Invoke(ctx context.Context, id string, payload json.RawMessage, async bool) (v1.FunctionRun, error) {
	q := url.Values{}
	if async {
		q.Set("async", "1")
	}
	return send[v1.FunctionRun](ctx, c, "POST", objPath("/v1/functions", id)+"/invoke", q, v1.InvokeRequest{Payload: payload})
}

// FunctionRuns returns a function's runs, newest first (limit 0: the server's default).
func (c *Client) FunctionRuns(ctx context.Context, id string, limit int) ([]v1.FunctionRun, error) {
	out, err := send[v1.FunctionRuns](ctx, c, "GET", objPath("/v1/functions", id)+"/runs", limitQuery(limit), nil)
	return out.Runs, err
}

// FunctionRun returns one run of a function.
func (c *Client) FunctionRun(ctx context.Context, id, runID string) (v1.FunctionRun, error) {
	return send[v1.FunctionRun](ctx, c, "GET", objPath("/v1/functions", id)+"/runs/"+url.PathEscape(runID), nil, nil)
}

// CreateSchedule creates a cron schedule.
func (c *Client) CreateSchedule(ctx context.Context, req v1.CreateScheduleRequest) (v1.Schedule, error) {
	return send[v1.Schedule](ctx, c, "POST", "/v1/schedules", nil, req)
}

// ListSchedules returns the team's schedules, newest first.
func (c *Client) ListSchedules(ctx context.Context) ([]v1.Schedule, error) {
	out, err := send[v1.Schedules](ctx, c, "GET", "/v1/schedules", nil, nil)
	return out.Schedules, err
}

// GetSchedule returns one schedule.
func (c *Client) GetSchedule(ctx context.Context, id string) (v1.Schedule, error) {
	return send[v1.Schedule](ctx, c, "GET", objPath("/v1/schedules", id), nil, nil)
}

// DeleteSchedule deletes a schedule and its runs.
func (c *Client) DeleteSchedule(ctx context.Context, id string) error {
	return c.call(ctx, "DELETE", objPath("/v1/schedules", id), nil, nil, nil)
}

// PauseSchedule stops a schedule firing.
func (c *Client) PauseSchedule(ctx context.Context, id string) (v1.Schedule, error) {
	return send[v1.Schedule](ctx, c, "POST", objPath("/v1/schedules", id)+"/pause", nil, nil)
}

// ResumeSchedule makes a paused schedule fire again (from now on).
func (c *Client) ResumeSchedule(ctx context.Context, id string) (v1.Schedule, error) {
	return send[v1.Schedule](ctx, c, "POST", objPath("/v1/schedules", id)+"/resume", nil, nil)
}

// TriggerSchedule runs a schedule now.
func (c *Client) TriggerSchedule(ctx context.Context, id string) (v1.ScheduleRun, error) {
	return send[v1.ScheduleRun](ctx, c, "POST", objPath("/v1/schedules", id)+"/trigger", nil, nil)
}

// ScheduleRuns returns a schedule's runs, newest first.
func (c *Client) ScheduleRuns(ctx context.Context, id string, limit int) ([]v1.ScheduleRun, error) {
	out, err := send[v1.ScheduleRuns](ctx, c, "GET", objPath("/v1/schedules", id)+"/runs", limitQuery(limit), nil)
	return out.Runs, err
}

func limitQuery(limit int) url.Values {
	if limit <= 0 {
		return nil
	}
	return url.Values{"limit": {strconv.Itoa(limit)}}
}
