/**
 * The stdout and stderr text of a stream's events, handed to the callbacks as it comes (exec
 * with callbacks, a process handle's `wait`).
 * @internal
 */
export class OutputGatherer {
  private readonly out: string[] = [];
  private readonly err: string[] = [];

  constructor(
    private readonly onStdout?: (data: string) => void,
    private readonly onStderr?: (data: string) => void,
  ) {}

  add(ev: { type: string; data?: string }): void {
    if (ev.type === "stdout") {
      this.out.push(ev.data ?? "");
      this.onStdout?.(ev.data ?? "");
    } else if (ev.type === "stderr") {
      this.err.push(ev.data ?? "");
      this.onStderr?.(ev.data ?? "");
    }
  }

  get stdout(): string {
    return this.out.join("");
  }

  get stderr(): string {
    return this.err.join("");
  }
}
