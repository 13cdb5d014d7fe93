export { PandaStack, DEFAULT_BASE_URL, type PandaStackOptions, type DeploymentInfo, type InfoRange, type Usage, type UsageItem, type AuditEntry, type AuditPage, type SandboxEvent } from "./client.js";
export {
  Sandbox,
  Sandboxes,
  Filesystem,
  ExecStream,
  ExecResult,
  Snapshots,
  Templates,
  Volumes,
  volumeOf,
  type Command,
  type CreateSandboxParams,
  type ListSandboxesParams,
  type ExecOptions,
  type ExecStreamOptions,
  type ExecEvent,
  type FileInfo,
  type FileOptions,
  type ForkResult,
  type Snapshot,
  type Template,
  type TemplateSpec,
  type BuildTemplateOptions,
  type Volume,
  type VolumeAttachment,
  type VolumeMount,
  type SandboxData,
  type SandboxMetrics,
  type SandboxState,
} from "./sandbox.js";
export { Result, Execution, type ExecutionError, type Logs, type CodeContext, type CodeLanguage, type RunCodeOptions, type ResultData } from "./code.js";
export {
  Processes,
  ProcessHandle,
  type Process,
  type ProcessEvent,
  type ProcessResult,
  type StartProcessOptions,
  type WaitOptions,
} from "./processes.js";
export {
  Functions,
  Schedules,
  type FunctionInfo,
  type FunctionSpec,
  type FunctionVersion,
  type FunctionRun,
  type Schedule,
  type ScheduleRun,
  type CreateScheduleParams,
} from "./functions.js";
export { Webhooks, verifyWebhook, type Webhook, type WebhookDelivery, type WebhookEvent, type WebhookEventType, type ProcessExit, type DatabaseEvent } from "./webhooks.js";
export { Apps, type App, type AppBuild, type AppPlan, type AppPreview, type AppSpec, type Deployment, type GitHubHook } from "./apps.js";
export {
  Databases,
  type Database,
  type DatabaseBackup,
  type DatabaseConnection,
  type CreateDatabaseParams,
  type QueryResult,
} from "./databases.js";
export {
  PandaStackError,
  ConfigurationError,
  APIConnectionError,
  InvalidRequest,
  Unauthorized,
  Forbidden,
  NotFound,
  Conflict,
  PayloadTooLarge,
  RateLimited,
  InternalError,
  NotImplemented,
  Capacity,
  Timeout,
  NoSpace,
  BuildFailed,
  errorFromPayload,
  type PandaStackErrorOptions,
} from "./errors.js";
export type { FetchLike, FetchResponse } from "./http.js";
export { WatchHandle, type FileEvent } from "./filetree.js";
export { Terminal, type TerminalOptions } from "./terminal.js";
export { packTar, unpackTar, type TarEntry } from "./tar.js";
export { VERSION } from "./version.js";
