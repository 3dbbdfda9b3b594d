class Parameter:
    def __init__(self, data, requires_grad=True):
        self.data = data
