/**
 * Typed errors. Every error answer of the API (`{"error": {"code", "message"}}`) becomes an
 * instance of the subclass named after its code, carrying `code`, `message`, `status` (HTTP status;
 * `undefined` when no answer arrived) and `requestId` (the answer's `X-Request-Id`).
 */

export interface PandaStackErrorOptions {
  code?: string;
  status?: number;
  requestId?: string;
  body?: unknown;
  cause?: unknown;
}

/** Base class of every error the SDK throws. */
export class PandaStackError extends Error {
  static readonly defaultCode: string = "error";
  /** The API's error code, e.g. `"not_found"`. */
  readonly code: string;
  /** HTTP status of the answer; undefined when no answer arrived. */
  readonly status?: number;
  /** `X-Request-Id` of the answer: quote it when reporting a problem. */
  readonly requestId?: string;
  /** The decoded error body, if any. */
  readonly body?: unknown;

  constructor(message: string, options: PandaStackErrorOptions = {}) {
    super(message);
    if (options.cause !== undefined) {
      (this as { cause?: unknown }).cause = options.cause;
    }
    this.name = new.target.name;
    this.code = options.code ?? (new.target as unknown as typeof PandaStackError).defaultCode;
    this.status = options.status;
    this.requestId = options.requestId;
    this.body = options.body;
  }

  override toString(): string {
    const extra: string[] = [];
    if (this.status !== undefined) extra.push(`HTTP ${this.status}`);
    if (this.code) extra.push(this.code);
    if (this.requestId && !this.message.includes(this.requestId)) extra.push(`request id ${this.requestId}`);
    return `${this.name}: ${this.message}${extra.length ? ` (${extra.join(", ")})` : ""}`;
  }
}

/** The client is missing something it needs (an API key, a usable base URL). */
export class ConfigurationError extends PandaStackError {
  static override readonly defaultCode = "configuration";
}
/** The API could not be reached, or the connection broke before the answer arrived. */
export class APIConnectionError extends PandaStackError {
  static override readonly defaultCode = "connection_error";
}
/** 400 `invalid_request`: malformed request or a value out of range. */
export class InvalidRequest extends PandaStackError {
  static override readonly defaultCode = "invalid_request";
}
/** 401 `unauthorized`: the API key is missing, malformed, unknown or revoked. */
export class Unauthorized extends PandaStackError {
  static override readonly defaultCode = "unauthorized";
}
/** 403 `forbidden`: the key may not do this. */
export class Forbidden extends PandaStackError {
  static override readonly defaultCode = "forbidden";
}
/** 404 `not_found`: no such sandbox, snapshot, file or template (or another team's). */
export class NotFound extends PandaStackError {
  static override readonly defaultCode = "not_found";
}
/** 409 `conflict`: wrong state for the call, e.g. exec on a killed sandbox. */
export class Conflict extends PandaStackError {
  static override readonly defaultCode = "conflict";
}
/** 413 `payload_too_large`: a body or upload is over the server's limit. */
export class PayloadTooLarge extends PandaStackError {
  static override readonly defaultCode = "payload_too_large";
}
/** 429 `rate_limited`: too many requests; `retryAfter` is the server's hint in seconds. */
export class RateLimited extends PandaStackError {
  static override readonly defaultCode = "rate_limited";
  retryAfter?: number;
}
/** 500 `internal`: the server failed; quote `requestId`. */
export class InternalError extends PandaStackError {
  static override readonly defaultCode = "internal";
}
/** 501 `not_implemented`: this server does not support the call (yet). */
export class NotImplemented extends PandaStackError {
  static override readonly defaultCode = "not_implemented";
}
/** 503 `capacity`: no host has room for the sandbox right now. */
export class Capacity extends PandaStackError {
  static override readonly defaultCode = "capacity";
}
/** 504 `timeout` from the server, or `client_timeout` when no answer came in time. */
export class Timeout extends PandaStackError {
  static override readonly defaultCode = "timeout";
}
/** 507 `no_space`: the sandbox's disk is full. */
export class NoSpace extends PandaStackError {
  static override readonly defaultCode = "no_space";
}

/**
 * `build_failed`: a template build started and failed (a step or the ready check failed, an
 * unknown package, a disk too small). It arrives at the end of the build's stream: no status.
 */
export class BuildFailed extends PandaStackError {
  static override readonly defaultCode = "build_failed";
}

type ErrorClass = new (message: string, options?: PandaStackErrorOptions) => PandaStackError;

const BY_CODE: Record<string, [ErrorClass, number]> = {
  invalid_request: [InvalidRequest, 400],
  unauthorized: [Unauthorized, 401],
  forbidden: [Forbidden, 403],
  not_found: [NotFound, 404],
  conflict: [Conflict, 409],
  payload_too_large: [PayloadTooLarge, 413],
  rate_limited: [RateLimited, 429],
  internal: [InternalError, 500],
  not_implemented: [NotImplemented, 501],
  capacity: [Capacity, 503],
  timeout: [Timeout, 504],
  no_space: [NoSpace, 507],
};

const BY_STATUS: Record<number, ErrorClass> = Object.fromEntries(
  Object.values(BY_CODE).map(([cls, status]) => [status, cls]),
);

// Codes that only arrive inside a stream (no HTTP status of their own).
const STREAM_CODES: Record<string, ErrorClass> = { build_failed: BuildFailed };

/** Build the typed error for an API error answer (`payload` is the decoded body, any shape). */
export function errorFromPayload(
  status: number | undefined,
  payload: unknown,
  requestId?: string,
  extra: { retryAfter?: number; fallbackMessage?: string } = {},
): PandaStackError {
  let code: string | undefined;
  let message: string | undefined;
  const err = (payload as { error?: unknown } | null)?.error;
  if (err && typeof err === "object") {
    const e = err as { code?: unknown; message?: unknown };
    if (typeof e.code === "string") code = e.code;
    if (typeof e.message === "string") message = e.message;
  }
  let cls: ErrorClass | undefined = code ? BY_CODE[code]?.[0] ?? STREAM_CODES[code] : undefined;
  if (!cls && status !== undefined) {
    cls = BY_STATUS[status] ?? (status >= 500 ? InternalError : status >= 400 ? InvalidRequest : PandaStackError);
  }
  cls ??= PandaStackError;
  if (status === undefined && code && BY_CODE[code]) status = BY_CODE[code][1];
  message ||= extra.fallbackMessage ?? (status !== undefined ? `HTTP ${status}` : "request failed");
  const e = new cls(message, {
    code: code ?? (cls as unknown as typeof PandaStackError).defaultCode,
    status,
    requestId,
    body: payload,
  });
  if (e instanceof RateLimited) e.retryAfter = extra.retryAfter;
  return e;
}
